-- Question: which ten customers have spent the most over their lifetime?
-- Tables: user, order (an order's PK is `USER#<email>`, so it joins its user through the key).
SELECT u.email,
       u.name,
       count(*) AS orders,
       sum(o.total) AS lifetime_value
FROM "order" o
JOIN "user" u ON split_part(o."PK", '#', 2) = u.email
WHERE o.status <> 'cancelled'
GROUP BY u.email, u.name
ORDER BY lifetime_value DESC, u.email
LIMIT 10;
