-- Question: which product categories bring the most revenue?
-- Tables: order_item, product, order (three entities joined: item lines, the catalog, and the
-- order for its status). Cancelled orders are left out.
SELECT p.category,
       count(DISTINCT oi.order_id) AS orders,
       sum(oi.quantity) AS units,
       sum(oi.quantity * oi.unit_price) AS revenue
FROM order_item oi
JOIN product p ON p.sku = oi.sku
JOIN "order" o ON o.order_id = oi.order_id
WHERE o.status <> 'cancelled'
GROUP BY p.category
ORDER BY revenue DESC, p.category;
