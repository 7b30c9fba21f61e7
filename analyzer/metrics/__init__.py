"""Lost-token accounting: the loss waterfall per request and its aggregates."""
