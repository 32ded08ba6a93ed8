-- A scripted sqlite3 workload for the real-program tests: tables of 200,000
-- rows made by recursive CTEs, indexes, joins, grouping, window functions,
-- updates, deletes, JSON and text work, and a VACUUM. Every result printed is
-- deterministic, so a run with brisk preloaded must print exactly what a run
-- without it prints.
.bail on
.mode list
PRAGMA cache_size = -65536;

CREATE TABLE customer(id INTEGER PRIMARY KEY, name TEXT, city TEXT, score REAL);
CREATE TABLE orders(id INTEGER PRIMARY KEY, customer INTEGER, item TEXT, quantity INTEGER,
                    price REAL, note TEXT);

WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < 20000)
INSERT INTO customer
SELECT i, 'customer-' || printf('%06d', i) || '-' || substr(hex(i * 2654435761), 1, 6),
       'city-' || (i * 7919 % 97), (i * 37 % 1000) / 10.0
FROM n;

WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < 200000)
INSERT INTO orders
SELECT i, 1 + (i * 104729 % 20000), 'item-' || (i * 31 % 5003), 1 + i % 17,
       (i * 7 % 10000) / 100.0,
       CASE WHEN i % 3 = 0 THEN NULL ELSE substr(replace(hex(randomblob(0)) || printf('%.*c', 1 + i % 300, 'x'), 'x', 'ab'), 1, 1 + i % 400) END
FROM n;

CREATE INDEX orders_customer ON orders(customer);
CREATE INDEX orders_item ON orders(item, quantity);
CREATE INDEX customer_city ON customer(city);

SELECT 'rows', (SELECT count(*) FROM customer), (SELECT count(*) FROM orders);
SELECT 'note bytes', sum(length(note)) FROM orders;

SELECT 'top cities';
SELECT c.city, count(*), printf('%.2f', sum(o.quantity * o.price))
FROM orders o JOIN customer c ON c.id = o.customer
GROUP BY c.city ORDER BY sum(o.quantity * o.price) DESC, c.city LIMIT 10;

SELECT 'ranks';
SELECT customer, total, rank FROM (
  SELECT customer, printf('%.2f', sum(quantity * price)) AS total,
         rank() OVER (ORDER BY sum(quantity * price) DESC, customer) AS rank
  FROM orders GROUP BY customer)
WHERE rank <= 5 OR rank % 4000 = 0;

SELECT 'items';
SELECT item, count(DISTINCT customer), max(quantity), group_concat(DISTINCT quantity)
FROM orders WHERE item LIKE 'item-1%7' GROUP BY item ORDER BY item LIMIT 8;

UPDATE orders SET note = upper(coalesce(note, 'none')) || '-' || id WHERE id % 5 = 0;
DELETE FROM orders WHERE quantity = 13;
UPDATE customer SET name = name || '-' || city, score = score * 1.5 WHERE id % 11 = 0;

SELECT 'after updates', count(*), sum(length(note)), printf('%.1f', sum(score))
FROM orders JOIN customer ON customer.id = orders.customer;

SELECT 'json';
SELECT json_group_array(json_object('id', id, 'city', city, 'score', score))
FROM (SELECT * FROM customer WHERE id % 2500 = 0 ORDER BY id);

SELECT 'strings';
WITH RECURSIVE s(i, t) AS (SELECT 1, 'a' UNION ALL
                           SELECT i + 1, t || char(97 + i % 26) FROM s WHERE i < 3000)
SELECT count(*), sum(length(t)), substr(max(t), 1, 40), sum(instr(t, 'xyz')) FROM s;

CREATE TEMP TABLE scratch AS
SELECT customer, group_concat(item, ',') AS items FROM orders GROUP BY customer;
SELECT 'scratch', count(*), sum(length(items)), min(length(items)), max(length(items)) FROM scratch;
DROP TABLE scratch;

VACUUM;
PRAGMA integrity_check;
SELECT 'done', (SELECT count(*) FROM orders), (SELECT sum(quantity) FROM orders);
