"""Standing grants ("always allow"): made with an approve (`create`), used by the gate in place
of a decision (`use`), seen and revoked (`access`)."""
