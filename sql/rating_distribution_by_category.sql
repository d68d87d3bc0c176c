-- Question: how are review ratings distributed within each product category?
-- Tables: review, product (a review's PK is `PRODUCT#<sku>`; it also carries `sku`).
SELECT p.category,
       r.rating,
       count(*) AS reviews
FROM review r
JOIN product p ON p.sku = r.sku
GROUP BY p.category, r.rating
ORDER BY p.category, r.rating;
