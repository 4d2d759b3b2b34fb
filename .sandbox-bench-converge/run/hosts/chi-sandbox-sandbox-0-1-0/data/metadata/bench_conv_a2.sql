ATTACH DATABASE bench_conv_a2
ENGINE = Ordinary
