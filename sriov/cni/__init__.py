"""The node side of SR-IOV: the CNI plugin and its installer. No Django in here: the
plugin runs for every pod and must start fast."""
