"""What users read: the run summary, reports, comparisons."""
