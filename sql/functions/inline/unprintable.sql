-- unprintable: whether a text an operator or a caller gives, which other
-- people's terminals and pages show (an external id, a reason, a rehearsal's
-- lines), holds a character that is not printed as itself: a C0 or C1
-- control character (a terminal escape, a tab, a line break, a carriage
-- return that rewrites the line) or a bidirectional override or isolate
-- (U+200E, U+200F, U+202A-U+202E, U+2066-U+2069: text shown in another order
-- than it reads). The one definition of the rule; NULL for NULL. Inlined where
-- it is called (sql/functions/inline/).
CREATE OR REPLACE FUNCTION unprintable(p_text text) RETURNS boolean
LANGUAGE sql IMMUTABLE
AS $$
    SELECT p_text ~ '[\x01-\x1f\x7f-\x9f\u200e\u200f\u202a-\u202e\u2066-\u2069]';
$$;
