-- transient_error: whether an error (its SQLSTATE) says nothing about the data
-- it met: a lock or statement timeout, a deadlock, a serialization failure, a
-- lost connection, a server going down or out of resources. Internal. A batch
-- call that fails on one of these fails as a whole, to be tried again as it
-- was; any other error is one node's, and the batch refuses that node alone
-- (QT050) and applies the others.
CREATE OR REPLACE FUNCTION transient_error(p_sqlstate text) RETURNS boolean
LANGUAGE sql IMMUTABLE
AS $$
    SELECT p_sqlstate IN ('40001', '40P01', '55P03', '57014')
        OR left(p_sqlstate, 2) IN ('08', '53', '57', '58');
$$;
