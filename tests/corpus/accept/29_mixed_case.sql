-- title: Keywords are case-insensitive
select State, count(*) From People where AGE > 30 group by state
