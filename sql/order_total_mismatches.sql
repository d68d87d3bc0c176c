-- Question (data quality): which orders have a total that differs from the sum of their item lines?
-- Tables: order, order_item.
SELECT o.order_id,
       o.total,
       sum(oi.quantity * oi.unit_price) AS lines_total,
       o.total - sum(oi.quantity * oi.unit_price) AS difference
FROM "order" o
JOIN order_item oi ON oi.order_id = o.order_id
GROUP BY o.order_id, o.total
HAVING o.total <> sum(oi.quantity * oi.unit_price)
ORDER BY o.order_id;
