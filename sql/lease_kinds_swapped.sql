--
-- lease_kinds_swapped: every step of sql/lease_kinds.sql the other way
-- round: templates are table limits, and rows memory limits.
--
\set tmpl_memory false
\set row_memory true
\i sql/lease_kinds.sql
