"""Selections of records: the selection, its file (``.ttsel``), compact id sets, the scan that
makes one and the filter tests it runs, and the files of a dataset that reads one."""
