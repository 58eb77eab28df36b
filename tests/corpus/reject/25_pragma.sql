-- title: PRAGMA
-- expect: PRAGMA is not allowed
PRAGMA table_info('people')
