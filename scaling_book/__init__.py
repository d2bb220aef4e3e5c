"""scaling-book: a verifiers environment built from How To Scale Your Model."""
