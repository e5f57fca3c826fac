"""The foundation: files written atomically, provenance, devices, lengths. Imports no other poscli layer."""
