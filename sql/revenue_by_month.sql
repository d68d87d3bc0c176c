-- Question: how much revenue did each month bring, and from how many orders?
-- Tables: order. Cancelled orders are left out.
SELECT substr(CAST(date_trunc('month', to_timestamp(ordered_at)) AS VARCHAR), 1, 7) AS month,
       count(*) AS orders,
       sum(total) AS revenue
FROM "order"
WHERE status <> 'cancelled'
GROUP BY 1
ORDER BY 1;
