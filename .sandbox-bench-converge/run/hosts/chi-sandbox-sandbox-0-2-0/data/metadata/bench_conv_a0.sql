ATTACH DATABASE bench_conv_a0
ENGINE = Ordinary
