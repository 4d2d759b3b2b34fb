ATTACH DATABASE bench_conv_b0
ENGINE = Ordinary
