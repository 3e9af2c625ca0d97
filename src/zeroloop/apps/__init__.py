"""What a person runs: the ``zeroloop`` command, terminal play, the web server
and its page, the record viewer and position analysis."""
