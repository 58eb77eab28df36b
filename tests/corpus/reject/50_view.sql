-- title: A view may read protected tables
-- expect: the view 'people_view'
SELECT COUNT(*) FROM people_view
