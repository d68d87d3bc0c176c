-- Question: which products in the catalog have never been ordered, and how much stock do they hold?
-- Tables: product, order_item.
SELECT p.sku, p.name, p.category, p.stock
FROM product p
LEFT JOIN order_item oi ON oi.sku = p.sku
WHERE oi.sku IS NULL
ORDER BY p.sku;
