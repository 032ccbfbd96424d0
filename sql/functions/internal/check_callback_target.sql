-- check_callback_target: what a callback target must be, checked when the
-- admin registers one (upsert_callback_target) and when an operator proposes
-- one and a second approves it (propose_callback_target, approve_proposal).
--   p_target_name    lower-case letters, digits, '_' and '-'
--   p_url            http(s)://host[:port][/path], no user or password, at most 2 KiB,
--                    a port 1 to 65535;
--                    a host written as an address passes host_address_problem:
--                    never link-local, a cloud metadata address, an IPv6 form that
--                    carries an IPv4 address (::ffff:127.0.0.1, 2002:a9fe:a9fe::,
--                    64:ff9b::7f00:1, ...) or an IPv4 one not written plainly;
--                    loopback and private ones only with p_allow_private
--   p_secret_ref     'env:QTG_CB_NAME' or 'file:NAME', never the secret itself
--                    (a variable of the QTG_CB_ prefix only: never another
--                    of the runner's, its database URL or a key)
--   p_allow_private, p_enabled   true or false
-- QT002 anything malformed, an address no callback may reach, a secret given
-- instead of its reference, or a url another target has. Internal.
CREATE OR REPLACE FUNCTION check_callback_target(
    p_call          text,
    p_target_name   text,
    p_url           text,
    p_secret_ref    text,
    p_allow_private boolean,
    p_enabled       boolean
) RETURNS void
LANGUAGE plpgsql
AS $$
DECLARE
    v_host    text;
    v_problem text;
BEGIN
    IF p_target_name IS NULL OR p_target_name !~ '^[a-z][a-z0-9_-]{0,62}$' THEN
        RAISE EXCEPTION '%: a target name is 1 to 63 lower-case letters, digits, _ or -, starting with a letter, got %', p_call,
                        coalesce(quote_literal(left(p_target_name, 80)), 'NULL')
            USING ERRCODE = 'QT002', HINT = 'Name the receiver, e.g. treasury-ops.';
    END IF;
    IF p_url IS NULL OR octet_length(p_url) > 2048
       OR p_url !~ '^https?://([A-Za-z0-9._-]+|\[[0-9A-Fa-f:.]+\])(:[0-9]{1,5})?(/[!-~]*)?$' THEN
        RAISE EXCEPTION '%: % needs an http(s) url of at most 2 KiB with a host and no user or password, got %', p_call,
                        p_target_name, coalesce(quote_literal(left(p_url, 80)), 'NULL')
            USING ERRCODE = 'QT002', HINT = 'Give e.g. https://hooks.example.com/qtg.';
    END IF;
    IF substring(p_url FROM '^https?://(?:[A-Za-z0-9._-]+|\[[0-9A-Fa-f:.]+\]):([0-9]+)')::integer NOT BETWEEN 1 AND 65535 THEN
        RAISE EXCEPTION '%: the url of % names port %, and a port is 1 to 65535', p_call, p_target_name,
                        substring(p_url FROM '^https?://(?:[A-Za-z0-9._-]+|\[[0-9A-Fa-f:.]+\]):([0-9]+)')
            USING ERRCODE = 'QT002', HINT = 'Give the receiver''s port, or none for 443 (https) or 80 (http).';
    END IF;
    v_host := substring(p_url FROM '^https?://(\[[^]]*\]|[^:/]*)');
    v_problem := host_address_problem(v_host, coalesce(p_allow_private, false));
    IF v_problem IS NOT NULL THEN
        RAISE EXCEPTION '%: the url of % names no address a callback may reach: %', p_call, p_target_name, v_problem
            USING ERRCODE = 'QT002',
                  HINT = 'Give the receiver''s name or its own address; loopback and private addresses need allow_private, '
                         'link-local and cloud metadata addresses are never a target.';
    END IF;
    IF p_secret_ref ~ '^whsec_' THEN
        RAISE EXCEPTION '%: % was given a secret, not where to find it', p_call, p_target_name
            USING ERRCODE = 'QT002',
                  HINT = 'The secret never enters the database: put it in a variable or a 0600 file where the runners run and give env:NAME or file:NAME.';
    END IF;
    IF p_secret_ref IS NULL OR p_secret_ref !~ '^(env:QTG_CB_[A-Z0-9_]{1,120}|file:[A-Za-z_][A-Za-z0-9_.-]{0,127})$' THEN
        RAISE EXCEPTION '%: the secret of % is named env:QTG_CB_NAME or file:NAME, got %', p_call,
                        p_target_name, coalesce(quote_literal(left(p_secret_ref, 20) || '...'), 'NULL')
            USING ERRCODE = 'QT002',
                  HINT = 'env:QTG_CB_NAME is a variable of the runner''s environment (only those: a target may not name '
                         'another of the runner''s variables, QTG_DATABASE_URL or a key''s), file:NAME a 0600 file in '
                         'QTG_CALLBACK_SECRETS_DIR.';
    END IF;
    IF p_allow_private IS NULL OR p_enabled IS NULL THEN
        RAISE EXCEPTION '%: allow_private and enabled must be true or false', p_call
            USING ERRCODE = 'QT002';
    END IF;
    IF EXISTS (SELECT 1 FROM callback_targets WHERE url = p_url AND target_name <> p_target_name) THEN
        RAISE EXCEPTION '%: another target has the url of %', p_call, p_target_name
            USING ERRCODE = 'QT002', HINT = 'A url is one target''s: change that target, or give another url.';
    END IF;
END
$$;
