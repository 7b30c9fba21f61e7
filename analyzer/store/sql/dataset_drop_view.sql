-- Undo register_requests: the dataset's `requests` view.
DROP VIEW IF EXISTS temp.requests;
