ATTACH DATABASE bench_conv_a1
ENGINE = Ordinary
