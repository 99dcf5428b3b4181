"""What a learner hands in and how an instructor grades it: the portfolio and `grade`."""
