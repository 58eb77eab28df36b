-- title: ALTER TABLE
-- expect: ALTER is not allowed
ALTER TABLE people ADD COLUMN flag BOOLEAN
