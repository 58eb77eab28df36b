-- title: An undeclared column in ON
-- expect: it is not declared in the policy
SELECT COUNT(*) FROM people p JOIN regions r ON p.name = r.state
