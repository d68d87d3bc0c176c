-- Question: what share of customers who bought once came back to buy again?
-- Tables: order (customers are the emails in the orders' PK `USER#<email>`). Cancelled orders
-- are left out.
WITH per_customer AS (
    SELECT split_part("PK", '#', 2) AS email, count(*) AS orders
    FROM "order"
    WHERE status <> 'cancelled'
    GROUP BY 1
)
SELECT count(*) AS customers,
       sum(CASE WHEN orders >= 2 THEN 1 ELSE 0 END) AS repeat_customers,
       round(100.0 * sum(CASE WHEN orders >= 2 THEN 1 ELSE 0 END) / count(*), 2) AS repeat_rate_pct
FROM per_customer;
