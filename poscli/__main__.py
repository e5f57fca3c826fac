from poscli.cli import main

main()
