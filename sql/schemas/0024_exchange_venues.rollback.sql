SET LOCAL ROLE qtg_owner;

SELECT qtg_admin.apply_per_network($ddl$
DROP INDEX movement_request_nodes_transfer_to_idx;
DROP TABLE capital_transfer_followups;
DROP TABLE venue_deposit_addresses;
DROP TABLE venue_chains;
DROP TABLE exchange_venues;
$ddl$);
