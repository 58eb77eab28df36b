-- title: COPY to a file
-- expect: COPY is not allowed
COPY people TO 'people.csv' (HEADER)
