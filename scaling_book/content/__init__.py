"""Content: reading `seed/` into item specs (`loader`, `specs`), the executable gate (`gate`), the Hugging
Face export (`export`) and the `build` pipeline that strings them together with the store.

Imports the store and the graders (the gate runs them); never verifiers.
"""
