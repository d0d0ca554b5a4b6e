"""How results are compared: the accuracy rules, the tolerance table, outputs judged by what they
mean, the causes of a failure, old records judged again."""
