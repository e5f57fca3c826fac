from poscli.cli.app import main

main()
