-- qtg.decision_clock(): the time a decision is taken, for a rule that compares
-- it with a deadline after waiting for locks (an approval against the
-- movement's expiry). clock() is the statement's start: a statement that
-- waited for a lock past a deadline would still be on time by it, and an
-- approval could record a time before the movement it approves was created.
-- This is the moment of the call (clock_timestamp()), or clock()'s pinned
-- value where clock() is pinned (a test database), so tests still drive it.
CREATE OR REPLACE FUNCTION decision_clock() RETURNS timestamptz
LANGUAGE plpgsql VOLATILE
AS $$
BEGIN
    IF coalesce(current_setting('qtg.now', true), '') <> '' THEN
        RETURN clock();
    END IF;
    RETURN clock_timestamp();
END
$$;
