SET LOCAL ROLE qtg_owner;

SELECT qtg_admin.apply_per_network($ddl$
ALTER TABLE node_requeues DROP COLUMN from_state;
$ddl$);

CREATE OR REPLACE FUNCTION qtg_admin.refuse_reopening() RETURNS trigger
LANGUAGE plpgsql
AS $$
DECLARE
    v_refusal text := format('%s %s is %s, a final state: it cannot become %s', TG_ARGV[0], OLD.id,
                             to_jsonb(OLD) ->> TG_ARGV[1], to_jsonb(NEW) ->> TG_ARGV[1]);
    v_hint    text := 'A finished movement or node stays as it finished; start a new movement for more.';
BEGIN
    IF TG_ARGV[0] = 'node' THEN
        RAISE EXCEPTION '%', v_refusal USING ERRCODE = 'QT021', HINT = v_hint;
    END IF;
    RAISE EXCEPTION '%', v_refusal USING ERRCODE = 'QT020', HINT = v_hint;
END
$$;
REVOKE ALL ON FUNCTION qtg_admin.refuse_reopening() FROM PUBLIC;
