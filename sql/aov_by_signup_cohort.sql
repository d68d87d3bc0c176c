-- Question: what is the average order value of customers grouped by the month they signed up?
-- Tables: user, order (joined through the order's PK `USER#<email>`). Cancelled orders are left out.
SELECT substr(CAST(date_trunc('month', to_timestamp(u.signup_at)) AS VARCHAR), 1, 7) AS cohort,
       count(DISTINCT u.email) AS customers,
       count(*) AS orders,
       round(CAST(sum(o.total) AS DOUBLE) / count(*), 2) AS avg_order_value
FROM "user" u
JOIN "order" o ON split_part(o."PK", '#', 2) = u.email
WHERE o.status <> 'cancelled'
GROUP BY 1
ORDER BY 1;
