SET LOCAL ROLE qtg_owner;

SELECT qtg_admin.apply_per_network($ddl$
DELETE FROM lane_baselines
 WHERE lane IN ('cctp-fast', 'cctp-standard', 'ccip', 'stargate-taxi', 'stargate-bus',
                'bybit-withdraw', 'bybit-deposit');
DROP TABLE chain_protocols;
$ddl$);
