from t2n.cli import main

main()
