-- title: SET of an engine setting
-- expect: SET threads is not allowed
SET threads = 1
