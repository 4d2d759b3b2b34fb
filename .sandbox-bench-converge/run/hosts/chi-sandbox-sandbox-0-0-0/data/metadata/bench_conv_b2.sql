ATTACH DATABASE bench_conv_b2
ENGINE = Ordinary
