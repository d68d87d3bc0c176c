-- Question: how many orders sit at each status, and what share of all orders is that?
-- Tables: order.
SELECT status,
       count(*) AS orders,
       round(100.0 * count(*) / (SELECT count(*) FROM "order"), 2) AS pct_of_orders
FROM "order"
GROUP BY status
ORDER BY orders DESC, status;
