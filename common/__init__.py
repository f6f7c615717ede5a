"""What several rooms share: storage locations, failpoints, the read-cache contract and the base error."""
