-- unprintable: whether a text an operator or a caller gives, which other
-- people's terminals and pages show (an external id, a reason, a rehearsal's
-- lines), holds a character that is not printed as itself: a C0 or C1
-- control character (a terminal escape, a tab, a line break, a carriage
-- return that rewrites the line), a bidirectional mark, override or isolate
-- (U+061C, U+200E, U+200F, U+202A-U+202E, U+2066-U+2069: text shown in
-- another order than it reads), a line or paragraph separator (U+2028,
-- U+2029) or an invisible one (U+200B, U+FEFF). The one definition of the
-- rule in SQL (the CLI's printable() escapes the same characters, held to
-- this by a test); NULL for NULL. Inlined where it is called
-- (sql/functions/inline/).
CREATE OR REPLACE FUNCTION unprintable(p_text text) RETURNS boolean
LANGUAGE sql IMMUTABLE
AS $$
    SELECT p_text ~ '[\x01-\x1f\x7f-\x9f\u061c\u200b\u200e\u200f\u2028\u2029\u202a-\u202e\u2066-\u2069\ufeff]';
$$;
