ATTACH TABLE t3
(
    id UInt64, 
    n UInt8 DEFAULT 1
)
ENGINE = MergeTree
ORDER BY id
SETTINGS index_granularity = 8192
