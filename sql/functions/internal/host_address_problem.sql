-- host_address_problem: what is wrong with a url's host written as an address,
-- as a sentence; NULL when nothing is, and for a host that is a name (the
-- callback_dispatcher checks every address a name resolves to when it
-- connects). check_callback_target refuses a target's url with it (QT002),
-- so that an address no callback may reach is refused when it is registered,
-- by the same categories the dispatcher applies when it connects
-- (qtg_runner/workers/callback_dispatcher.py, address_problem):
--
--   never                   a cloud metadata address (169.254.169.254, 169.254.170.2,
--                           100.100.100.200, 192.0.0.192, fd00:ec2::254), link-local
--                           (169.254/16, fe80::/10), unspecified (0/8, ::), multicast
--                           (224/4, ff00::/8), reserved (240/4; IPv6 outside 2000::/3,
--                           fc00::/7, fec0::/10 and ::1)
--   only with allow_private loopback (127/8, ::1), private and other non-global ones
--                           (10/8, 172.16/12, 192.168/16, 100.64/10, 192.0.0/24, 198.18/15,
--                           the documentation nets, fc00::/7, fec0::/10, 2001::/23,
--                           2001:db8::/32, 3fff::/20)
--   never                   an IPv6 address that carries an IPv4 one: IPv4-mapped
--                           (::ffff:0:0/96), IPv4-compatible (::/96), IPv4-translated
--                           (::ffff:0:0:0/96), NAT64 (64:ff9b::/96, 64:ff9b:1::/48), 6to4
--                           (2002::/16), Teredo (2001::/32), ISATAP (an interface id
--                           0:5efe or 200:5efe). A stack, a NAT64 gateway or a relay takes
--                           them to the IPv4 address they carry (2002:a9fe:a9fe:: is
--                           169.254.169.254 over 6to4) where a check that reads them as
--                           IPv6 sees a global address: the IPv4 address is to be given
--                           itself, and is then checked as one.
--   never                   an IPv4 address not written as four decimal numbers without
--                           leading zeros: a resolver reads 0177.0.0.1, 0x7f.1, 127.1 and
--                           2130706433 as 127.0.0.1 (PostgreSQL's inet reads the first as
--                           177.0.0.1), nor a name whose last label is a number (which
--                           the resolver reads as an address).
-- p_host is the url's host as written, an IPv6 address in its brackets.
-- Internal.
CREATE OR REPLACE FUNCTION host_address_problem(p_host text, p_allow_private boolean) RETURNS text
LANGUAGE plpgsql STABLE
AS $$
DECLARE
    v_host    text := lower(p_host);
    v_address inet;
    v_bytes   bytea;   -- an IPv6 address's 16 bytes
    v_at      integer; -- where the IPv4 address it carries starts in them (0-based),
    v_how     text;    -- and by what convention
    v_flip    integer := 0;
    v_carried inet;
BEGIN
    IF v_host ~ '^\[.*\]$' THEN
        v_host := substr(v_host, 2, length(v_host) - 2);
        IF v_host !~ ':' OR v_host ~ '/' THEN
            RETURN format('%s is not an IPv6 address', p_host);
        END IF;
        BEGIN  -- (not pg_input_is_valid: PostgreSQL 15 has none)
            v_address := v_host::inet;
        EXCEPTION WHEN invalid_text_representation THEN
            RETURN format('%s is not an IPv6 address', p_host);
        END;
    ELSIF v_host ~ '(^|\.)([0-9]+|0x[0-9a-f]*)\.?$' THEN
        IF v_host !~ '^((25[0-5]|2[0-4][0-9]|1[0-9][0-9]|[1-9]?[0-9])\.){3}(25[0-5]|2[0-4][0-9]|1[0-9][0-9]|[1-9]?[0-9])$' THEN
            RETURN format('%s ends in a number, which makes it an IPv4 address to a resolver: write one as four '
                          'decimal numbers without leading zeros (0177.0.0.1, 0x7f.1, 127.1 and 2130706433 are '
                          '127.0.0.1)', p_host);
        END IF;
        v_address := v_host::inet;
    ELSE
        RETURN NULL;
    END IF;

    IF family(v_address) = 6 AND v_address NOT IN ('::', '::1') THEN
        v_bytes := substr(inet_send(v_address), 5);
        SELECT c.at, c.how INTO v_at, v_how
          FROM (VALUES (1, '::ffff:0:0/96'::inet, 12, 'IPv4-mapped'),
                       (2, '::ffff:0:0:0/96', 12, 'IPv4-translated'),
                       (3, '::/96', 12, 'IPv4-compatible'),
                       (4, '64:ff9b::/96', 12, 'NAT64'),
                       (5, '64:ff9b:1::/48', 12, 'NAT64'),
                       (6, '2002::/16', 2, '6to4'),
                       (7, '2001::/32', 12, 'Teredo')) AS c(rank, net, at, how)
         WHERE v_address <<= c.net
         ORDER BY c.rank
         LIMIT 1;
        IF NOT FOUND AND substr(v_bytes, 9, 4) IN ('\x00005efe'::bytea, '\x02005efe'::bytea) THEN
            v_at := 12;
            v_how := 'ISATAP';
        END IF;
        IF v_how = 'Teredo' THEN
            v_flip := 255;  -- the client's address, each bit inverted
        END IF;
        IF v_at IS NOT NULL THEN
            v_carried := format('%s.%s.%s.%s', get_byte(v_bytes, v_at) # v_flip, get_byte(v_bytes, v_at + 1) # v_flip,
                                get_byte(v_bytes, v_at + 2) # v_flip, get_byte(v_bytes, v_at + 3) # v_flip)::inet;
            RETURN format('%s carries the IPv4 address %s (%s): give the IPv4 address itself', p_host,
                          host(v_carried), v_how);
        END IF;
    END IF;

    RETURN CASE
        WHEN v_address = ANY ('{169.254.169.254, 169.254.170.2, 100.100.100.200, 192.0.0.192, fd00:ec2::254}'::inet[]) THEN
            format('%s is a cloud metadata address', p_host)
        WHEN v_address <<= '169.254.0.0/16' OR v_address <<= 'fe80::/10' THEN
            format('%s is link-local', p_host)
        WHEN v_address <<= '0.0.0.0/8' OR v_address = '::' OR v_address <<= '224.0.0.0/4' OR v_address <<= 'ff00::/8' THEN
            format('%s is not a unicast address', p_host)
        WHEN v_address <<= '240.0.0.0/4'
          OR (family(v_address) = 6 AND v_address <> '::1'
              AND NOT (v_address <<= '2000::/3' OR v_address <<= 'fc00::/7' OR v_address <<= 'fec0::/10')) THEN
            format('%s is a reserved address', p_host)
        WHEN p_allow_private THEN
            NULL
        WHEN v_address <<= '127.0.0.0/8' OR v_address = '::1' THEN
            format('%s is a loopback address and the target is not allow_private', p_host)
        WHEN v_address <<= ANY ('{10.0.0.0/8, 172.16.0.0/12, 192.168.0.0/16, 100.64.0.0/10, 192.0.0.0/24,
                                  192.0.2.0/24, 198.18.0.0/15, 198.51.100.0/24, 203.0.113.0/24,
                                  fc00::/7, fec0::/10, 2001::/23, 2001:db8::/32, 3fff::/20}'::inet[]) THEN
            format('%s is a private address and the target is not allow_private', p_host)
    END;
END
$$;
