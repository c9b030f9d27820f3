"""The job history's revisions, oldest first."""
