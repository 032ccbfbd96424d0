-- report_limits: the bounds of engine_limits that a runner's reports are held
-- to (a document: evidence, a payload; a text: an error, a reference). A
-- runner reads them at start and cuts an evidence document or an error text to
-- them before it reports it, so that an oversized answer from an executor is
-- recorded cut, not refused round after round (QT005).
CREATE OR REPLACE VIEW report_limits AS
SELECT max_json_bytes, max_text_bytes
  FROM engine_limits;
