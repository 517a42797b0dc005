-- Delivery errors recorded before this version could name the channel's URL (a secret: the
-- HTTP client's text was "error sending request for url (URL): ...") or echo the receiver's
-- answer ("HTTP 405: <body>"). Errors are written without either now; this cleans older ones.
UPDATE alert_outbox SET last_error = 'error sending request (text removed: it named the channel''s URL)'
    WHERE last_error LIKE '%for url (%';
UPDATE alert_outbox SET last_error = substr(last_error, 1, instr(last_error, ':') - 1)
    WHERE last_error LIKE 'HTTP %: %';
UPDATE alert_deliveries SET error = 'error sending request (text removed: it named the channel''s URL)'
    WHERE error LIKE '%for url (%';
UPDATE alert_deliveries SET error = substr(error, 1, instr(error, ':') - 1)
    WHERE error LIKE 'HTTP %: %';
