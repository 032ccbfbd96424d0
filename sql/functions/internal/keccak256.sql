-- keccak256: the Keccak-256 hash of p_data (Ethereum's: the original Keccak
-- padding, 0x01 ... 0x80, not SHA3-256's 0x06), as 32 bytes; NULL for NULL.
-- An EVM transaction's hash is keccak256 of its signed bytes: a recorded hash
-- is checked against the bytes recorded with it here, in SQL, not taken on
-- the runner's word. Keccak-f[1600] over 25 64-bit lanes held in bigint
-- (two's complement: a lane's top bit is its sign), rate 136 bytes, written
-- for checking, not for speed: about a millisecond a 136-byte block, so it
-- checks the rare records (a replacement), not the dispatcher's every one.
-- Internal; reads nothing.
CREATE OR REPLACE FUNCTION keccak256(p_data bytea) RETURNS bytea
LANGUAGE plpgsql IMMUTABLE STRICT
AS $$
DECLARE
    c_rate   constant integer := 136;
    -- the round constants, and each lane's rotation (lane x + 5y)
    c_rc     constant bigint[] := ARRAY[
        x'0000000000000001'::bigint, x'0000000000008082'::bigint, x'800000000000808A'::bigint,
        x'8000000080008000'::bigint, x'000000000000808B'::bigint, x'0000000080000001'::bigint,
        x'8000000080008081'::bigint, x'8000000000008009'::bigint, x'000000000000008A'::bigint,
        x'0000000000000088'::bigint, x'0000000080008009'::bigint, x'000000008000000A'::bigint,
        x'000000008000808B'::bigint, x'800000000000008B'::bigint, x'8000000000008089'::bigint,
        x'8000000000008003'::bigint, x'8000000000008002'::bigint, x'8000000000000080'::bigint,
        x'000000000000800A'::bigint, x'800000008000000A'::bigint, x'8000000080008081'::bigint,
        x'8000000000008080'::bigint, x'0000000080000001'::bigint, x'8000000080008008'::bigint];
    c_rot    constant integer[] := ARRAY[0, 1, 62, 28, 27, 36, 44, 6, 55, 20, 3, 10, 43, 25, 39,
                                         41, 45, 15, 21, 8, 18, 2, 61, 56, 14];
    v_padded bytea;
    v_state  bigint[] := array_fill(0::bigint, ARRAY[25]);
    v_b      bigint[] := array_fill(0::bigint, ARRAY[25]);
    v_c      bigint[] := array_fill(0::bigint, ARRAY[5]);
    v_d      bigint;
    v_lane   bigint;
    v_n      integer;
    v_out    bytea := '\x';
    v_block  integer;
    v_x      integer;
    v_y      integer;
    v_i      integer;
    v_r      integer;
BEGIN
    -- the padding: 0x01, zeros, 0x80 (one byte 0x81 when it is the only one)
    v_n := c_rate - length(p_data) % c_rate;
    v_padded := p_data || CASE WHEN v_n = 1 THEN '\x81'::bytea
                               ELSE '\x01'::bytea || decode(repeat('00', v_n - 2), 'hex') || '\x80'::bytea END;
    FOR v_block IN 0 .. length(v_padded) / c_rate - 1 LOOP
        -- absorb: each 8 bytes little-endian into a lane
        FOR v_i IN 0 .. c_rate / 8 - 1 LOOP
            v_lane := 0;
            FOR v_x IN REVERSE 7 .. 0 LOOP
                v_lane := (v_lane << 8) | get_byte(v_padded, v_block * c_rate + v_i * 8 + v_x);
            END LOOP;
            v_state[v_i + 1] := v_state[v_i + 1] # v_lane;
        END LOOP;
        FOR v_r IN 1 .. 24 LOOP
            -- theta
            FOR v_x IN 0 .. 4 LOOP
                v_c[v_x + 1] := v_state[v_x + 1] # v_state[v_x + 6] # v_state[v_x + 11]
                                # v_state[v_x + 16] # v_state[v_x + 21];
            END LOOP;
            FOR v_x IN 0 .. 4 LOOP
                v_lane := v_c[(v_x + 1) % 5 + 1];
                v_d := v_c[(v_x + 4) % 5 + 1] # ((v_lane << 1) | ((v_lane >> 63) & 1));
                FOR v_y IN 0 .. 4 LOOP
                    v_state[v_x + 5 * v_y + 1] := v_state[v_x + 5 * v_y + 1] # v_d;
                END LOOP;
            END LOOP;
            -- rho and pi: lane (x, y) rotated into (y, 2x + 3y)
            FOR v_x IN 0 .. 4 LOOP
                FOR v_y IN 0 .. 4 LOOP
                    v_lane := v_state[v_x + 5 * v_y + 1];
                    v_n := c_rot[v_x + 5 * v_y + 1];
                    IF v_n > 0 THEN
                        v_lane := (v_lane << v_n) | ((v_lane >> (64 - v_n)) & ~((-1)::bigint << v_n));
                    END IF;
                    v_b[v_y + 5 * ((2 * v_x + 3 * v_y) % 5) + 1] := v_lane;
                END LOOP;
            END LOOP;
            -- chi
            FOR v_y IN 0 .. 4 LOOP
                FOR v_x IN 0 .. 4 LOOP
                    v_state[v_x + 5 * v_y + 1] := v_b[v_x + 5 * v_y + 1]
                        # (~v_b[(v_x + 1) % 5 + 5 * v_y + 1] & v_b[(v_x + 2) % 5 + 5 * v_y + 1]);
                END LOOP;
            END LOOP;
            -- iota
            v_state[1] := v_state[1] # c_rc[v_r];
        END LOOP;
    END LOOP;
    -- squeeze: the first four lanes, little-endian
    FOR v_i IN 1 .. 4 LOOP
        FOR v_x IN 0 .. 7 LOOP
            v_out := v_out || set_byte('\x00'::bytea, 0, ((v_state[v_i] >> (8 * v_x)) & 255)::integer);
        END LOOP;
    END LOOP;
    RETURN v_out;
END
$$;
