"""The PostgreSQL wire protocol (v3) front end: `dpsql serve`."""
