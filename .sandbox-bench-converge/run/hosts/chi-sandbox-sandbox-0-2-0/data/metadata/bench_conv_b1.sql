ATTACH DATABASE bench_conv_b1
ENGINE = Ordinary
