SET LOCAL ROLE qtg_owner;

DROP TABLE qtg.test_database;
