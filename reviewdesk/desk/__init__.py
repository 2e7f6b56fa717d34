"""The desk: the reviewers' server-rendered pages (`views/`), the live socket (`consumers.py`)
and the terminal review (`manage.py review`)."""
