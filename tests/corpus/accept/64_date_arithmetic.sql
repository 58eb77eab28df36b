-- title: TPC-H's constant date arithmetic, folded to the DATE PostgreSQL computes (month ends clamped)
SELECT COUNT(*) AS n FROM visits WHERE visited <= DATE '1998-12-01' - INTERVAL '90' DAY AND visited >= DATE '1994-01-31' + INTERVAL '1' MONTH
