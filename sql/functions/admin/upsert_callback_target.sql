-- upsert_callback_target: registers a receiver of signed callbacks, or changes
-- it. An admin step: SECURITY INVOKER, no grant. Only a movement whose
-- callback_url is exactly a registered, enabled target's url gets a POST
-- (claim_callbacks refuses the others).
--   p_target_name    lower-case letters, digits, '_' and '-'
--   p_url            http(s)://host[:port][/path], no user or password, at most 2 KiB
--   p_secret_ref     where the dispatcher finds the signing secret (never the
--                    secret): 'env:NAME' (a variable of the runner's
--                    environment) or 'file:NAME' (a 0600 file in
--                    QTG_CALLBACK_SECRETS_DIR), holding a Standard Webhooks
--                    secret ('whsec_' and base64)
--   p_allow_private  the target may be on loopback or a private address
--                    (never link-local or a cloud metadata address)
--   p_enabled        false stops the deliveries to it (its rows are REFUSED)
-- QT002 anything malformed, a secret given instead of its reference, or a url
-- another target has (check_callback_target, which a proposal of a target,
-- propose_callback_target, passes too). Audited as entity 'callback_target' when something
-- changed; the same call again changes nothing.
CREATE OR REPLACE FUNCTION upsert_callback_target(
    p_target_name   text,
    p_url           text,
    p_secret_ref    text,
    p_allow_private boolean DEFAULT false,
    p_enabled       boolean DEFAULT true
) RETURNS void
LANGUAGE plpgsql
AS $$
DECLARE
    v_now      timestamptz := clock();
    v_previous callback_targets;
BEGIN
    PERFORM check_callback_target('upsert_callback_target', p_target_name, p_url, p_secret_ref,
                                  p_allow_private, p_enabled);

    SELECT * INTO v_previous FROM callback_targets WHERE target_name = p_target_name FOR UPDATE;
    IF v_previous.target_name IS NOT NULL
       AND (v_previous.url, v_previous.secret_ref, v_previous.allow_private, v_previous.enabled)
           = (p_url, p_secret_ref, p_allow_private, p_enabled) THEN
        RETURN;
    END IF;
    INSERT INTO callback_targets (target_name, url, secret_ref, allow_private, enabled, created_at, updated_at)
    VALUES (p_target_name, p_url, p_secret_ref, p_allow_private, p_enabled, v_now, v_now)
    ON CONFLICT (target_name) DO UPDATE
       SET url = excluded.url, secret_ref = excluded.secret_ref, allow_private = excluded.allow_private,
           enabled = excluded.enabled, updated_at = excluded.updated_at;
    PERFORM write_audit(ARRAY[(NULL, 'callback_target', p_target_name, NULL, 'callback_target_set', NULL, NULL,
                               jsonb_strip_nulls(jsonb_build_object(
                                   'url', p_url, 'secret_ref', p_secret_ref,
                                   'allow_private', p_allow_private, 'enabled', p_enabled,
                                   'previous_url', v_previous.url,
                                   'previous_allow_private', v_previous.allow_private,
                                   'previous_enabled', v_previous.enabled)))::qtg.audit_event]);
END
$$;
