-- An in-memory event log for the real-program benchmark (bench/real_programs.py):
--   sqlite3 -bail -cmd ".parameter set @rows 300000" :memory: < sqlite_events.sql
-- @rows events with text and blobs of varied length (every value computed from
-- the row number, nothing random), then indexes, grouping, LIKE scans,
-- updates, deletes and a rebuild, each printing a result in a fixed order.
-- The benchmark compares the output across allocators.
.bail on
.mode list
PRAGMA cache_size = -131072;

CREATE TABLE host(id INTEGER PRIMARY KEY, name TEXT NOT NULL, zone TEXT NOT NULL);
CREATE TABLE event(
  id INTEGER PRIMARY KEY,
  host INTEGER NOT NULL,
  kind TEXT NOT NULL,
  level INTEGER NOT NULL,
  at INTEGER NOT NULL,
  message TEXT NOT NULL,
  payload BLOB
);

WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < 512)
INSERT INTO host
SELECT i, printf('host-%03d.%s', i, substr('abcdefghijklmnop', 1 + i % 16, 3)),
       'zone-' || (i * 13 % 11)
FROM n;

-- h is a multiplicative hash of the row number: it picks host, kind, level,
-- lengths and words, so the data look mixed but are the same every run.
WITH RECURSIVE n(i, h) AS (
  SELECT 1, 2654435761 % 4294967291
  UNION ALL
  SELECT i + 1, (h * 48271) % 2147483647 FROM n WHERE i < @rows
)
INSERT INTO event
SELECT i,
       1 + h % 512,
       CASE h % 7 WHEN 0 THEN 'login' WHEN 1 THEN 'logout' WHEN 2 THEN 'read'
                  WHEN 3 THEN 'write' WHEN 4 THEN 'error' WHEN 5 THEN 'timeout'
                  ELSE 'retry' END,
       h % 5,
       1700000000 + i * 3 + h % 3,
       printf('%s user%05d %s %.*c end',
              CASE h % 5 WHEN 0 THEN 'request' WHEN 1 THEN 'reply' WHEN 2 THEN 'notice'
                         WHEN 3 THEN 'warning' ELSE 'failure' END,
              h % 40000, substr(hex(h), 1, 1 + h % 8), h % 80, 'x'),
       CASE WHEN h % 4 = 0 THEN NULL
            ELSE CAST(printf('%.*c', 16 + h % 300, char(65 + h % 26)) AS BLOB) END
FROM n;

CREATE INDEX event_host ON event(host, at);
CREATE INDEX event_kind ON event(kind, level);

SELECT 'rows', count(*), sum(length(message)), sum(length(payload)) FROM event;

SELECT 'per kind';
SELECT kind, count(*), sum(level), max(length(message)) FROM event GROUP BY kind ORDER BY kind;

SELECT 'per zone';
SELECT h.zone, e.kind, count(*), sum(length(e.payload))
FROM event e JOIN host h ON h.id = e.host
GROUP BY h.zone, e.kind ORDER BY h.zone, e.kind;

SELECT 'like scans';
SELECT count(*) FROM event WHERE message LIKE '%user1%';
SELECT count(*) FROM event WHERE message LIKE 'failure%' AND message LIKE '%xxxxxxxx%';
SELECT count(*), sum(length(payload)) FROM event WHERE CAST(payload AS TEXT) LIKE 'QQQQ%';

SELECT 'busiest hosts';
SELECT h.name, count(*) AS c, count(DISTINCT e.kind)
FROM event e JOIN host h ON h.id = e.host
WHERE e.level >= 3 GROUP BY h.name ORDER BY c DESC, h.name LIMIT 10;

SELECT 'distinct users', count(DISTINCT substr(message, instr(message, 'user'), 9)) FROM event;

SELECT 'window';
SELECT host, at, gap FROM (
  SELECT host, at, at - lag(at) OVER (PARTITION BY host ORDER BY at) AS gap
  FROM event WHERE kind = 'error'
) WHERE gap IS NOT NULL ORDER BY gap DESC, host, at LIMIT 10;

UPDATE event SET message = message || ' (seen)', level = level + 1 WHERE kind = 'timeout';
UPDATE event SET payload = CAST(upper(hex(payload)) AS BLOB)
  WHERE payload IS NOT NULL AND id % 9 = 0;
SELECT 'after update', sum(level), sum(length(message)), sum(length(payload)) FROM event;

DELETE FROM event WHERE kind IN ('logout', 'retry') OR (level = 0 AND id % 3 = 0);
SELECT 'after delete', count(*), sum(length(message)) FROM event;

CREATE TABLE summary AS
SELECT host, kind, count(*) AS n, group_concat(substr(message, 1, 12), '|') AS sample
FROM event GROUP BY host, kind;
SELECT 'summary', count(*), sum(n), sum(length(sample)) FROM summary;
SELECT host, kind, n, substr(sample, 1, 40) FROM summary ORDER BY n DESC, host, kind LIMIT 5;

DROP INDEX event_kind;
CREATE INDEX event_message ON event(message);
SELECT 'ordered', min(message), max(message) FROM event;
SELECT 'sorted sample';
SELECT id, substr(message, 1, 30) FROM event ORDER BY message, id LIMIT 5 OFFSET 1000;

VACUUM;
SELECT 'integrity', integrity_check FROM pragma_integrity_check;
