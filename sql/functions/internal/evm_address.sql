-- evm_address: an EVM address as the chain registry stores it (0x and 40
-- lower-case hex digits), from any case (EIP-55 checksummed or not); anything
-- else is refused with QT002, naming the argument (p_what).
CREATE OR REPLACE FUNCTION evm_address(p_what text, p_address text) RETURNS text
LANGUAGE plpgsql IMMUTABLE
AS $$
BEGIN
    IF p_address IS NULL OR p_address !~ '^0[xX][0-9a-fA-F]{40}$' THEN
        RAISE EXCEPTION '%: % is not an EVM address', p_what, coalesce(quote_literal(left(p_address, 80)), 'NULL')
            USING ERRCODE = 'QT002',
                  HINT = 'Give 0x followed by 40 hexadecimal digits.';
    END IF;
    RETURN '0x' || lower(substr(p_address, 3));
END
$$;
