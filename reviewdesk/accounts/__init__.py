"""Accounts: users and roles (groups), hashed scoped API tokens, device keys with their
endorsements and revocations, the demo users; every change to them audited."""
